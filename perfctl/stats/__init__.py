"""Statistics: the decision rule (``decision``) and verdicts across a comparison."""
