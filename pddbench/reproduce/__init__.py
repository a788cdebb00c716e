"""The article's reproduction (`pddbench reproduce`, `make run`): claims, ledger, regime,
best splits, common loads, figures and report."""
