"""Text tools both sides share, below them: sentences and passages, tokenisation (spaCy with
Sudachi, English stems), name keys across scripts."""
