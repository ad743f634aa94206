"""One module per middleware, plus the hook contract (``base``, ``context``: the run context), the chain builder
(``chain``) and the settings it is built from (``settings``, ``run_settings``)."""
