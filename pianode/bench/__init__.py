"""``pianode bench``: every figure as a same-run ratio against a baseline, or against a fixed target."""
