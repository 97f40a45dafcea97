"""`dspark-lsp eval`: completion quality measured as the editor sees it.

Modules, one job each:

* ``problems``   the holes: HumanEval infilling sets and holes cut in real code (the bench's loaders)
* ``execution``  pass@1: a completed HumanEval program run with its tests in a subprocess (the one
  implementation; the bench calls it too)
* ``metrics``    exact match, edit similarity, too long / too short, percentiles
* ``oracle``     the best line-boundary cut of the model's raw output (a ceiling for any stop rule)
* ``infill``     llama.cpp's /infill-style completion on the same holes (optional extra)
* ``runner``     one problem through the service, the raw output, the oracle and the peer
* ``report``     per set and language aggregates, the table and the JSON
* ``cli``        the sub-command
"""
