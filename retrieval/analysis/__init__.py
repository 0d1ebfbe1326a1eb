"""Query Analyzer and Strategy Selector: a question becomes its type, time window, keywords,
names and the kind of answer it asks for; a preset is chosen from that."""
