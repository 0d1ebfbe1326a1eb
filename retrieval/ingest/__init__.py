"""The write path: validated items become analysed, embedded rows written in one transaction;
larger batches as jobs; files imported in stages."""
