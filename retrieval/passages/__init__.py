"""Long memories (issue #25): passages, each with its own vector; highlights; a response budget."""
