"""The deployable artifact of a run (export/weights.pt, model.pt2 and model_card.json), and
prediction from it that runs nothing the export holds."""
