"""The training demo (``python -m jax_accl.demo``): see jax_accl/demo/training.py."""
