"""Engine clients: where the engine runs relative to the HTTP server."""
