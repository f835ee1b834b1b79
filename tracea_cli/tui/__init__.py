"""Textual apps (imported only by the commands that open them)."""
