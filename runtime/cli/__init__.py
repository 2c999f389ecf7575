"""The `hearth` command (`runtime.cli.main:main`, also `python -m runtime.cli`): one module per command group."""
