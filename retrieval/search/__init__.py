"""Multi-Search Executor: one file a search leg, each with its own SQL, run concurrently under
deadlines; a slow or failed leg degrades the answer and says so."""
