"""Time expressions as people say them, into windows: atoms (the words and numbers found) ->
windows (composed) -> expressions (the parser), bounds (open-ended ranges), calendar_ja (eras,
holidays)."""
