"""When and where the models of retrieval.embedding run: the queries' lanes per tenant (query,
lanes), a write's documents in bounded calls on the write path's threads (documents), and the
measured cost of embedding (meter). The models know nothing of them."""
