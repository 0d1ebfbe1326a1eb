-- The keyword leg reads `postings` (0002); nothing has used this aggregate since.
DROP AGGREGATE IF EXISTS tsquery_or_agg(tsquery);
