"""ferro's benchmark scripts (plain argparse scripts; see docs/benchmarks.md)."""
