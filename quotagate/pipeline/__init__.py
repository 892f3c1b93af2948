"""PySpark jobs over the proxy's usage records (roll-ups, what-if replay, recommendations)."""
