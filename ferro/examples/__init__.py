"""Runnable examples: ``python -P -m ferro.examples.digits`` is the README's main job."""
