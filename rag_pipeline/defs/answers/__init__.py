"""The answer assets: ``answers`` → ``answer_metrics`` per dataset × answerer and ``answer_run_summary`` per dataset
(:mod:`.assets`), and what they show in the UI (:mod:`.metadata`)."""
