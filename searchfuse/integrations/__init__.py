"""Optional integrations with agent frameworks (installed as extras)."""
