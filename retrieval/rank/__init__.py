"""Reranker: pure functions over the legs' candidates — fuse, expand, admit, the character
n-gram signal, decay, dedupe, threshold, label, explain, highlight and budget."""
