"""Figures and tables made from records and summaries."""
