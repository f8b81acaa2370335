"""The local backend: workers as processes on this machine."""
