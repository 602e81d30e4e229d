"""The multi-key Tavily router."""
