"""Shared figure setup: headless backend and one style for every pddbench figure."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the headless Agg backend with the seaborn theme (imported lazily:
    plotting is slow to import and most commands need it only at the end)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    return plt
