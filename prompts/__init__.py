"""Prompt templates for `adapld edit`, shipped as `adapld_cli.prompts` (see pyproject).

Each ``*.txt`` file is one template; adapld_cli/edit/prompt.py documents the format.
"""
