"""Runs the Python blocks of README.md and docs/*.md as tests: see tests/_docs_code.py."""

pytest_plugins = ["_docs_code"]
