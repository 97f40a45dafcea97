import pkg.sub.mod as m
from pkg import sub
from pkg.util import Client as C
from pkg.util import helper

from ..outside import nothing


def run(config):
    client = C(config["url"])
    value = m.deep(1, 2)
    return helper(config, retries=value), client, sub, nothing
