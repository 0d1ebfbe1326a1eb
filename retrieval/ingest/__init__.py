"""The write path: the `Writer` (writer.py) owns it; validated items become analysed, embedded
rows written in one transaction (write.py); larger batches as jobs; files imported in stages."""
