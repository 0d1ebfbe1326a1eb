"""The API's routers: retrieval, memories, operations."""
