"""Configuration: presets, platforms, accelerators, campaigns as data; their schema, TOML reading, precisions."""
