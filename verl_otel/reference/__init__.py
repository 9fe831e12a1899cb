"""The docs site's reference pages (docs/reference/), generated from the code: every command from its parser
(:mod:`.commands`), every setting, metric, span and attribute from the vocabulary (:mod:`.vocabulary`), every panel
and alert from the rules. ``make docs`` writes them; tests/test_docs.py fails when a committed page drifts."""
