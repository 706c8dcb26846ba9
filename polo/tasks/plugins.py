"""``load_plugin(path)``: import a user's Python file so that its registrations happen (``polo.core.plugins``, where
an environment's entry point, below polo.tasks, loads its file too)."""
from polo.core.plugins import is_loaded, load_plugin

__all__ = ["is_loaded", "load_plugin"]
