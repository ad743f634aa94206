"""One module per middleware, plus the hook contract (``base``) and the chain builder (``chain``)."""
