"""The answer assets (:mod:`.assets`) and what they show in the Dagster UI (:mod:`.metadata`)."""
