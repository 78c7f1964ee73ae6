"""Small random graphs shared by the sampling tests."""
import torch
from torch_geometric.data import Data, HeteroData


def random_graph(num_nodes: int, num_edges: int, seed: int,
                 features: bool = True) -> Data:
    """A random directed graph (repeated edges and loops allowed) with node
    features, edge features and node labels."""
    gen = torch.Generator().manual_seed(seed)
    data = Data(edge_index=torch.randint(0, num_nodes, (2, num_edges),
                                         generator=gen),
                num_nodes=num_nodes)
    if features:
        data.x = torch.randn(num_nodes, 3, generator=gen)
        data.edge_attr = torch.randn(num_edges, 2, generator=gen)
        data.y = torch.randint(0, 3, (num_nodes,), generator=gen)
    return data


def paper_author_graph(seed: int, papers: int = 40,
                       authors: int = 25) -> HeteroData:
    """Papers citing papers, authors writing papers and the reverse."""
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(papers, 3, generator=gen)
    data["paper"].y = torch.randint(0, 4, (papers,), generator=gen)
    data["author"].x = torch.randn(authors, 2, generator=gen)
    data["paper", "cites", "paper"].edge_index = torch.randint(
        0, papers, (2, 4 * papers), generator=gen)
    writes = torch.stack([
        torch.randint(0, authors, (2 * papers,), generator=gen),
        torch.randint(0, papers, (2 * papers,), generator=gen)])
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    return data
