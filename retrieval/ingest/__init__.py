"""The write path: the `Writer` (writer.py) owns it; validated items (items.py) become a plan
(recipe.py: what is stored, what to embed in which order), analysed (index.py), embedded and
written as rows in one transaction (rows.py); larger batches as jobs (jobs.py); files imported in
stages (importer.py)."""
