"""Scenarios as data, and the matrix expansion scenario × barrier × fault × hit."""
