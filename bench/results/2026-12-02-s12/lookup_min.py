import sys
v = float(sys.argv[1])
import dspark_lsp.drafts.hybrid as H
orig = H.HybridDraftSource.__init__
def init(self, model_source, ngram=None, min_lookup_confidence=0.55, second_opinion=False):
    orig(self, model_source, ngram, v, second_opinion)
H.HybridDraftSource.__init__ = init
from dspark_lsp.cli import main
sys.exit(main(sys.argv[2:]))
