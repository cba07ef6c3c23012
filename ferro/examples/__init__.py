"""Runnable examples: ``python -m ferro.examples.digits`` is the README's main job."""
