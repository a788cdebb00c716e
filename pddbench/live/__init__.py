"""Live runs against real OpenAI-compatible engines (vLLM), with the simulator's record schema."""
