"""Bundled configuration files: the default settings and the accelerator catalogue."""

from importlib import resources

CONFIG_DIR = resources.files(__name__)
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"
