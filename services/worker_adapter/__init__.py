"""Worker-adapter service: one chat call to one named pool worker per ``conductor.work`` request."""
