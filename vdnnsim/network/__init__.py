"""Network specs, shape inference and the zoo of the paper's networks."""

from .shapes import DTYPE_BYTES, LayerInfo, NetworkInfo, infer
from .spec import LayerDef, NetworkSpec, load_network, network_from_dict
from .zoo import ZOO, zoo_network

__all__ = ["DTYPE_BYTES", "LayerDef", "LayerInfo", "NetworkInfo", "NetworkSpec", "ZOO",
           "infer", "load_network", "network_from_dict", "zoo_network"]
