"""Loaded at start-up by every process of an engine we launch (the engine's env puts this folder
on PYTHONPATH; spawned workers inherit it). NIXL's progress thread polls UCX with zero delay
(the Python API hard-codes pthrDelay=0): one full core per engine, which on a 2-core machine
starves the engines themselves. This sets the delay between its polls to
PDDBENCH_NIXL_PROGRESS_DELAY_US (default 200 us; 0 keeps NIXL's busy polling). The thread itself
stays on: UCX over TCP needs the target side to make progress for the initiator's reads."""

import os

_DELAY_US = int(os.environ.get("PDDBENCH_NIXL_PROGRESS_DELAY_US", "200"))

if _DELAY_US > 0:
    try:
        from nixl import _api
    except Exception:  # no NIXL in this environment: nothing to configure
        _api = None
    if _api is not None:
        _agent = _api.nixlBind.nixlAgent

        def _agent_with_delay(name, config, *args, **kwargs):
            config.pthrDelay = _DELAY_US
            return _agent(name, config, *args, **kwargs)

        _api.nixlBind.nixlAgent = _agent_with_delay
