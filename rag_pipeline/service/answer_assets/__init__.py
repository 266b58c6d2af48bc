"""The Dagster answer assets' operations (docs/design.md §7.3), in :mod:`.partition_answers`: a folder of its own
so the service folder stays small."""

from rag_pipeline.service.answer_assets.partition_answers import (
    AnswerAssetError,
    DatasetAnswerView,
    ProducedAnswers,
    answerer_keys,
    answers_file,
    dataset_answer_view,
    dropped_answers_dir,
    dropped_partitions,
    produce_answers,
    score_partition,
)

__all__ = ["AnswerAssetError", "DatasetAnswerView", "ProducedAnswers", "answerer_keys", "answers_file",
           "dataset_answer_view", "dropped_answers_dir", "dropped_partitions", "produce_answers", "score_partition"]
