"""The plain-PyTorch kernels that :mod:`poptorch_geometric.pure_backends`
gives PyG where pyg-lib and torch-sparse are missing: neighbour searches
(:mod:`.neighbours`), SplineCNN's B-splines (:mod:`.spline`), METIS and
neighbour sampling for PyG's own classes (:mod:`.sampling`)."""
