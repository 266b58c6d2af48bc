"""Why relevant chunks were missed: the reasons (pure), the own leg scores they need, a stored run diagnosed."""
