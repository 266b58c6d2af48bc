"""The HTTP front end: the API (``/api/v1``) and the console (``/admin``), over the service only."""
