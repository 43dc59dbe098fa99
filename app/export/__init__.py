"""The deployable artifact of a run (export/model.pt2 and model_card.json), and prediction
from it without the training code."""
