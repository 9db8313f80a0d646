"""The engine loop (schedule -> execute -> sample -> update) and the offline LLM API."""
