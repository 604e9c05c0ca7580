"""One module per CLI command; each `register(app, backend)` adds its command to the typer app."""
