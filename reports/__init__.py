"""Evidence: metrics rows (CSV/JSONL), IR dumps, kernel metadata, env fingerprints, repro bundles."""
