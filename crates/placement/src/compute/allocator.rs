//! A replay of ggml's graph allocator (`ggml_gallocr` in ggml-alloc.c) over a graph described
//! tensor by tensor. Where a graph's many small tensors are freed and reused in an order no
//! formula captures (Qwen3-Next's gated delta net), the compute buffer is what this replay says:
//! the same best-fit free list, the same in-place reuse of a parent, the same release of a
//! tensor after its last consumer, so the high-water mark is llama.cpp's own.

/// A tensor of the graph, by its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TensorId(u32);

impl TensorId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// The element types the compute graphs use (ggml's block size is 1 for all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    F32,
    F16,
    I32,
    I64,
    /// Bytes (a copy whose element type does not matter here).
    I8,
}

impl Element {
    fn size(self) -> u64 {
        match self {
            Element::F32 | Element::I32 => 4,
            Element::F16 => 2,
            Element::I64 => 8,
            Element::I8 => 1,
        }
    }
}

/// Whether an operation may write into its parent's memory (`ggml_op_can_inplace`): the
/// element-wise operations, norms, RoPE and softmax may; everything else gets memory of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reuse {
    InPlace,
    Fresh,
}

/// Extents and strides in bytes, as ggml's `ne` and `nb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    element: Element,
    ne: [u64; 4],
    nb: [u64; 4],
}

impl Layout {
    fn contiguous(element: Element, ne: [u64; 4]) -> Layout {
        let mut nb = [element.size(), 0, 0, 0];
        for i in 1..4 {
            nb[i] = nb[i - 1].saturating_mul(ne[i - 1]);
        }
        Layout { element, ne, nb }
    }

    /// `ggml_nbytes`: the span from the first element to one past the last.
    fn bytes(&self) -> u64 {
        if self.ne.contains(&0) {
            return 0;
        }
        self.ne
            .iter()
            .zip(self.nb)
            .fold(self.element.size(), |sum, (&ne, nb)| {
                sum.saturating_add((ne - 1).saturating_mul(nb))
            })
    }
}

/// `GGML_MAX_SRC`: the most sources one operation reads.
const MAX_SOURCES: usize = 10;

/// An operation's sources in order, kept inline (a graph has thousands of tensors, and one
/// allocation each was a fifth of a plan's time).
#[derive(Clone, Copy, Debug)]
struct Sources {
    ids: [TensorId; MAX_SOURCES],
    len: u8,
}

impl Sources {
    const NONE: Sources = Sources {
        ids: [TensorId(0); MAX_SOURCES],
        len: 0,
    };

    /// The first [`MAX_SOURCES`] of `ids` (no ggml operation reads more).
    fn of(ids: &[TensorId]) -> Sources {
        let mut sources = Sources::NONE;
        for (slot, &id) in sources.ids.iter_mut().zip(ids) {
            *slot = id;
            sources.len += 1;
        }
        sources
    }

    fn as_slice(&self) -> &[TensorId] {
        &self.ids[..usize::from(self.len)]
    }
}

/// What the allocator needs to know of one tensor.
#[derive(Clone, Debug)]
struct Tensor {
    layout: Layout,
    /// An operation's result (a node) rather than a constant or an input (a leaf).
    computed: bool,
    reuse: Reuse,
    /// The tensor whose memory a view shares (always the root, never a view itself). Where in
    /// it does not matter: the allocator never places a view, nor reuses one in place.
    view_of: Option<TensorId>,
    /// Memory outside the compute buffer: weights, the KV cache, recurrent states.
    external: bool,
    input: bool,
    output: bool,
    sources: Sources,
    /// Bytes the backend allocates past the tensor's own (`get_alloc_size`).
    extra_bytes: u64,
    /// For a weight or cache in host memory that this device's operations read (llama.cpp's op
    /// offload): the bytes of the copy its scheduler makes of it in the compute buffer.
    host_copy: u64,
    /// That tensor is a cache (read through views), not a weight: reading it starts no split.
    host_cache: bool,
    /// A node that runs on the host (a write into a cache in host memory): the device's split
    /// ends there, and what it computes is not in the device's buffer.
    on_host: bool,
    /// A weight (not a cache): what reads it runs where it is used.
    weight: bool,
    /// A weight whose readers run on another device ([`Graph::used_elsewhere`]).
    used_elsewhere: bool,
    /// A weight in host memory whose readers run on the host ([`Graph::used_by_host`]).
    used_by_host: bool,
    /// The first node after layers this graph does not hold ([`Graph::after_gap`]).
    after_gap: bool,
    /// Set by [`Graph::split_across_devices`]: the node runs on another device (or the host).
    elsewhere: bool,
    /// The device whose layer made the tensor ([`Graph::made_for`]): a tensor of this buffer
    /// read on several other devices is copied to each.
    made_for: u32,
}

impl Tensor {
    /// A leaf of `layout` that nothing marks: every flag off, no sources, no extra bytes.
    fn of(layout: Layout) -> Tensor {
        Tensor {
            layout,
            computed: false,
            reuse: Reuse::Fresh,
            view_of: None,
            external: false,
            input: false,
            output: false,
            sources: Sources::NONE,
            extra_bytes: 0,
            host_copy: 0,
            host_cache: false,
            on_host: false,
            weight: false,
            used_elsewhere: false,
            used_by_host: false,
            after_gap: false,
            elsewhere: false,
            made_for: 0,
        }
    }

    /// What the allocator places for the tensor: its bytes and the backend's extra.
    fn allocated_bytes(&self) -> u64 {
        self.layout.bytes().saturating_add(self.extra_bytes)
    }
}

/// A compute graph built as ggml builds one: tensors are made in a context, and
/// [`Graph::expand`] appends a result and, depth first, every source not yet in the graph.
#[derive(Default)]
pub(crate) struct Graph {
    tensors: Vec<Tensor>,
    visited: Vec<bool>,
    leafs: Vec<TensorId>,
    nodes: Vec<TensorId>,
    /// [`Graph::expand`]'s stack, kept between calls.
    stack: Vec<(TensorId, usize)>,
    /// Dependency nodes placed right after a node ([`Graph::keep_until`]), as (node, dependency).
    kept_until: Vec<(TensorId, TensorId)>,
    /// The next computed tensor made is the first after a gap ([`Graph::after_gap`]).
    gap_pending: bool,
    /// The device whose layer is being built ([`Graph::made_for`]).
    making_for: u32,
    /// Inputs nothing reads take no memory ([`Graph::receive_only_read_inputs`]).
    only_read_inputs: bool,
}

impl Graph {
    /// A graph with room for `tensors` tensors.
    pub(crate) fn with_capacity(tensors: usize) -> Graph {
        Graph {
            tensors: Vec::with_capacity(tensors),
            visited: Vec::with_capacity(tensors),
            leafs: Vec::with_capacity(tensors / 2),
            nodes: Vec::with_capacity(tensors),
            stack: Vec::new(),
            kept_until: Vec::new(),
            gap_pending: false,
            making_for: 0,
            only_read_inputs: false,
        }
    }

    fn push(&mut self, mut tensor: Tensor) -> TensorId {
        tensor.made_for = self.making_for;
        if self.gap_pending && tensor.computed && tensor.view_of.is_none() {
            tensor.after_gap = true;
            self.gap_pending = false;
        }
        self.tensors.push(tensor);
        self.visited.push(false);
        TensorId(u32::try_from(self.tensors.len() - 1).unwrap_or(u32::MAX))
    }

    fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    fn leaf(&mut self, element: Element, ne: [u64; 4], external: bool, input: bool) -> TensorId {
        self.push(Tensor {
            external,
            input,
            ..Tensor::of(Layout::contiguous(element, ne))
        })
    }

    /// A weight or a cache: memory of its own outside the compute buffer.
    pub(crate) fn external(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        self.leaf(element, ne, true, false)
    }

    /// A weight of the model: memory of its own outside the compute buffer, and what reads it
    /// runs where it is used (`ggml_backend_sched`'s first pass).
    pub(crate) fn weight(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        let id = self.leaf(element, ne, true, false);
        self.tensors[id.index()].weight = true;
        id
    }

    /// A graph input the compute buffer holds (token ids, positions, the mask, state indices).
    pub(crate) fn input(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        self.leaf(element, ne, false, true)
    }

    /// A graph input laid out as a view of another tensor (`nb`'s strides over `ne`): a copy of
    /// such a view, made where the view's source is, takes the bytes the view spans.
    pub(crate) fn input_laid_out(
        &mut self,
        element: Element,
        ne: [u64; 4],
        nb: [u64; 4],
    ) -> TensorId {
        self.push(Tensor {
            input: true,
            ..Tensor::of(Layout { element, ne, nb })
        })
    }

    /// `read` are copied by another device (their last readers here): a node of no size that
    /// reads them, expanded now, so that they are freed once it has run.
    pub(crate) fn read_elsewhere(&mut self, read: &[TensorId]) {
        let copied = self.op(Reuse::Fresh, Element::F32, [0, 1, 1, 1], read);
        self.expand(copied);
    }

    /// Marks this as a device's graph, whose inputs nothing reads take no memory: the scheduler
    /// copies to a device only what its nodes read (the host's graph keeps every input: they
    /// are its leaves).
    pub(crate) fn receive_only_read_inputs(&mut self) {
        self.only_read_inputs = true;
    }

    /// A tensor the graph makes without an operation (a block of zeros a later one fills),
    /// placed with the leaves in this device's buffer: not a graph input the host holds.
    pub(crate) fn scratch(&mut self, element: Element, ne: [u64; 4]) -> TensorId {
        self.leaf(element, ne, false, false)
    }

    /// An operation's contiguous result.
    pub(crate) fn op(
        &mut self,
        reuse: Reuse,
        element: Element,
        ne: [u64; 4],
        sources: &[TensorId],
    ) -> TensorId {
        self.push(Tensor {
            computed: true,
            reuse,
            sources: Sources::of(sources),
            ..Tensor::of(Layout::contiguous(element, ne))
        })
    }

    /// A tensor sharing the memory of `of` (a view, or a copy's result): no memory of its own.
    /// `sources` are the operation's sources in order.
    fn view_with(&mut self, of: TensorId, layout: Layout, sources: &[TensorId]) -> TensorId {
        let root = self.tensor(of).view_of.unwrap_or(of);
        self.push(Tensor {
            computed: true,
            view_of: Some(root),
            sources: Sources::of(sources),
            ..Tensor::of(layout)
        })
    }

    /// `ggml_view_4d`: extents `ne` with byte strides `nb` somewhere in `of`.
    pub(crate) fn view(&mut self, of: TensorId, ne: [u64; 4], nb: [u64; 4]) -> TensorId {
        let element = self.tensor(of).layout.element;
        self.view_with(of, Layout { element, ne, nb }, &[of])
    }

    /// `ggml_reshape_*`: the same contiguous memory under other extents.
    pub(crate) fn reshape(&mut self, of: TensorId, ne: [u64; 4]) -> TensorId {
        let element = self.tensor(of).layout.element;
        self.view(of, ne, Layout::contiguous(element, ne).nb)
    }

    /// `ggml_permute`: axis `i` of `of` becomes axis `axes[i]`.
    pub(crate) fn permute(&mut self, of: TensorId, axes: [usize; 4]) -> TensorId {
        let source = self.tensor(of).layout;
        let (mut ne, mut nb) = ([0; 4], [0; 4]);
        for (i, &axis) in axes.iter().enumerate() {
            ne[axis] = source.ne[i];
            nb[axis] = source.nb[i];
        }
        self.view(of, ne, nb)
    }

    /// An in-place operation on `of` (`ggml_add_inplace`) reading `others` too: the result is
    /// a view of `of`.
    pub(crate) fn in_place(&mut self, of: TensorId, others: &[TensorId]) -> TensorId {
        let layout = self.tensor(of).layout;
        let mut sources = vec![of];
        sources.extend_from_slice(others);
        self.view_with(of, layout, &sources)
    }

    /// `ggml_cpy(source, destination)`: the result is a view of the destination.
    pub(crate) fn copy(&mut self, source: TensorId, destination: TensorId) -> TensorId {
        let layout = self.tensor(destination).layout;
        self.view_with(destination, layout, &[source, destination])
    }

    /// `ggml_set_rows(destination, source, indices)`: the result is a view of the destination.
    pub(crate) fn write_rows(
        &mut self,
        destination: TensorId,
        source: TensorId,
        indices: TensorId,
    ) -> TensorId {
        let layout = self.tensor(destination).layout;
        self.view_with(destination, layout, &[source, indices, destination])
    }

    /// Has the backend allocate `bytes` more for `id` than its elements take (CUDA's flash
    /// attention keeps its f16 copies of a quantized K and V there).
    pub(crate) fn allocate_extra(&mut self, id: TensorId, bytes: u64) {
        self.tensors[id.index()].extra_bytes = bytes;
    }

    /// A weight (or, `cache`, a cache) `of` this device reads from host memory: the split of
    /// the graph that reads it first gets a copy of `bytes` ([`Graph::split_across_devices`]).
    pub(crate) fn in_host_memory(&mut self, of: TensorId, bytes: u64, cache: bool) {
        let tensor = &mut self.tensors[of.index()];
        tensor.host_copy = bytes;
        tensor.host_cache = cache;
    }

    /// `id` (a write into a cache in host memory) runs on the host.
    pub(crate) fn run_on_host(&mut self, id: TensorId) {
        self.tensors[id.index()].on_host = true;
    }

    /// The weight `of` is another device's, or in host memory for another device to run:
    /// what reads it runs there.
    pub(crate) fn used_elsewhere(&mut self, of: TensorId) {
        self.tensors[of.index()].used_elsewhere = true;
    }

    /// The tensors made from now are for the layer of the device `device` (any number that
    /// tells devices apart).
    pub(crate) fn made_for(&mut self, device: u32) {
        self.making_for = device;
    }

    /// The weight `of` is in host memory and what reads it runs on the host (no op offload).
    pub(crate) fn used_by_host(&mut self, of: TensorId) {
        self.tensors[of.index()].used_by_host = true;
    }

    /// The next node made follows layers this graph does not hold: it runs where they ran
    /// (elsewhere) unless it reads a weight of this device's.
    pub(crate) fn after_gap(&mut self) {
        self.gap_pending = true;
    }

    /// The graph as `ggml_backend_sched` splits it between this device and others, when it
    /// reads weights in host memory (op offload) or builds a layer another device holds (whose
    /// experts in host memory this device runs). Each node runs where the weight it reads is
    /// used (here for a weight in host memory, elsewhere for another device's), a write into a
    /// cache in host memory on the host, and any other node where the one before it ran (the
    /// scheduler's expansion; after a write on the host, here). A node reading a weight in host
    /// memory starts a split, and so does the first node here after ones run elsewhere; every
    /// tensor in host memory or computed elsewhere that a split reads is copied into this
    /// buffer at the split's start (once: a later split reads the same copy), in the order the
    /// split first reads them, and freed after its last reader. The graph's inputs, which the
    /// scheduler keeps on the host, come in the same way (with one split, as without op
    /// offload, that is all of them first). Nodes run elsewhere take no memory here.
    /// `host`: this is the host's graph, which holds the graph's inputs itself.
    pub(crate) fn split_across_devices(&mut self, host: bool) {
        let split_up = |t: &Tensor| t.host_copy > 0 || t.used_elsewhere || t.used_by_host;
        if !self.tensors.iter().any(split_up) {
            return;
        }
        for leaf in std::mem::take(&mut self.leafs) {
            if host {
                self.leafs.push(leaf);
                continue;
            }
            let tensor = &mut self.tensors[leaf.index()];
            if tensor.input {
                // Held by the host now: only its copies are in this buffer.
                tensor.host_copy = tensor.layout.bytes();
                tensor.host_cache = true;
                tensor.input = false;
                tensor.external = true;
            } else {
                self.leafs.push(leaf);
            }
        }
        let nodes = std::mem::take(&mut self.nodes);
        let places = self.place(&nodes, host);
        let mut order: Vec<TensorId> = Vec::with_capacity(nodes.len() * 2);
        // The split being gathered: its copies go before its nodes.
        let (mut copied_in, mut split): (Vec<TensorId>, Vec<TensorId>) = Default::default();
        // Each tensor's copy here, by index (made when a split first reads it).
        let mut copies: Vec<Option<TensorId>> = vec![None; self.tensors.len()];
        let mut after_elsewhere = false;
        // What of this buffer has been copied out, and for which devices' layers (a bit each):
        // a later reader there reads that copy.
        let mut copied_out = vec![0u64; self.tensors.len()];
        for (&node, place) in nodes.iter().zip(places) {
            if self.is_plain_view(node) {
                // A view reads nothing: what reads it gets the copy (of the view).
                let root = self.tensor(node).view_of.map(|r| self.tensor(r).elsewhere);
                self.tensors[node.index()].elsewhere = root.unwrap_or(false);
                split.push(node);
                continue;
            }
            if place != Some(Place::Here) {
                self.tensors[node.index()].elsewhere = true;
                after_elsewhere = true;
                let reader = 1u64 << self.tensor(node).made_for.min(63);
                let sources = self.tensors[node.index()].sources;
                let mut kept = Sources::NONE;
                for &source in sources.as_slice() {
                    let seen = &mut copied_out[source.index()];
                    let first = *seen & reader == 0;
                    *seen |= reader;
                    if first || self.tensor(source).elsewhere {
                        kept.ids[usize::from(kept.len)] = source;
                        kept.len += 1;
                    }
                }
                self.tensors[node.index()].sources = kept;
                split.push(node);
                continue;
            }
            let sources = self.tensors[node.index()].sources;
            let reads_host_weight = sources.as_slice().iter().any(|&s| {
                let source = self.tensor(s);
                source.host_copy > 0 && !source.host_cache
            });
            if after_elsewhere || (reads_host_weight && !split.is_empty()) {
                order.append(&mut copied_in);
                order.append(&mut split);
                after_elsewhere = false;
            }
            let mut rewired = sources;
            for (slot, &source) in rewired.ids.iter_mut().zip(sources.as_slice()) {
                let bytes = self.copy_bytes(source);
                if bytes == 0 {
                    continue;
                }
                *slot = match copies[source.index()] {
                    Some(copy) => copy,
                    None => {
                        let copy = self.copy_of(source, bytes);
                        copied_in.push(copy);
                        copies[source.index()] = Some(copy);
                        copy
                    }
                };
            }
            self.tensors[node.index()].sources = rewired;
            split.push(node);
        }
        order.append(&mut copied_in);
        order.append(&mut split);
        self.nodes = order;
    }

    /// Where each of `nodes` runs, as `ggml_backend_sched` assigns it (a view: `None`, it runs
    /// where what it views is): first by the weight it reads (here for this device's or one
    /// copied in from host memory, there for another device's) or the cache in host memory it
    /// writes (the host); then the others by their neighbours, the devices' assignments
    /// expanded down and up the graph, the host's only where no device's reached (the first
    /// node after a gap follows the layers that ran elsewhere).
    fn place(&self, nodes: &[TensorId], host: bool) -> Vec<Option<Place>> {
        // The host's own backend, which the devices' expansion passes over.
        let cpu = if host { Place::Here } else { Place::Host };
        let mut places: Vec<Option<Place>> = nodes
            .iter()
            .map(|&node| {
                let tensor = self.tensor(node);
                if self.is_plain_view(node) {
                    return None;
                }
                if tensor.on_host {
                    return Some(Place::Host);
                }
                let reads = |wanted: fn(&Tensor) -> bool| {
                    tensor
                        .sources
                        .as_slice()
                        .iter()
                        .any(|&s| wanted(self.tensor(s)))
                };
                if reads(|t| t.used_elsewhere) {
                    Some(Place::There)
                } else if reads(|t| t.used_by_host) {
                    Some(Place::Host)
                } else if reads(|t| t.weight || (t.host_copy > 0 && !t.host_cache)) {
                    Some(Place::Here)
                } else {
                    None
                }
            })
            .collect();
        let expand = |places: &mut Vec<Option<Place>>, down: bool, devices_only: bool| {
            let mut current: Option<Place> = None;
            let count = nodes.len();
            for step in 0..count {
                let i = if down { step } else { count - 1 - step };
                let node = nodes[i];
                if self.is_plain_view(node) {
                    continue;
                }
                // The first node after a gap follows the layers that ran elsewhere (met first
                // in the first pass, before anything assigned it).
                if down && devices_only && self.tensor(node).after_gap && places[i].is_none() {
                    current = Some(Place::There);
                }
                match places[i] {
                    Some(place) if devices_only && place == cpu => current = None,
                    Some(place) => current = Some(place),
                    None => places[i] = current,
                }
            }
        };
        expand(&mut places, true, true);
        expand(&mut places, false, true);
        expand(&mut places, true, false);
        expand(&mut places, false, false);
        for (place, &node) in places.iter_mut().zip(nodes) {
            if place.is_none() && !self.is_plain_view(node) {
                *place = Some(Place::Here);
            }
        }
        places
    }

    /// The scheduler's copy of `source` (`ggml_dup_tensor_layout`), `bytes` large: its layout
    /// where that is what the copy takes (so an operation may work in place on it), else
    /// plain bytes (a weight or cache whose type the graph does not carry).
    fn copy_of(&mut self, source: TensorId, bytes: u64) -> TensorId {
        let layout = self.tensor(source).layout;
        let copy = self.op(Reuse::Fresh, Element::I8, [bytes, 1, 1, 1], &[]);
        if layout.bytes() == bytes {
            self.tensors[copy.index()].layout = layout;
        }
        copy
    }

    /// A view, reshape or permutation (one source, whose memory it shares), as against an
    /// operation whose result is a view of its destination (a copy, a row write).
    fn is_plain_view(&self, id: TensorId) -> bool {
        let tensor = self.tensor(id);
        tensor.view_of.is_some() && tensor.sources.len == 1
    }

    /// What a node here reading `id` copies in: a tensor in host memory (its copy's bytes, or
    /// for a view of one the view's share of them), one computed elsewhere (its own bytes); 0
    /// for anything this device holds.
    fn copy_bytes(&self, id: TensorId) -> u64 {
        let tensor = self.tensor(id);
        if tensor.host_copy > 0 {
            return tensor.host_copy;
        }
        if tensor.elsewhere {
            return tensor.layout.bytes();
        }
        let Some(root) = tensor.view_of.map(|root| self.tensor(root)) else {
            return 0;
        };
        if root.host_copy == 0 || root.layout.bytes() == 0 {
            return 0;
        }
        let share = u128::from(tensor.layout.bytes()) * u128::from(root.host_copy)
            / u128::from(root.layout.bytes());
        u64::try_from(share).unwrap_or(u64::MAX)
    }

    /// A device's graph: the leaves it makes itself (scratch) come before what it receives,
    /// which the scheduler copies in as its first split starts, in the order the graph first
    /// reads them (the host holds the graph's inputs, placed before everything on its own).
    pub(crate) fn place_scratch_first(&mut self) {
        let mut first_read = vec![usize::MAX; self.tensors.len()];
        for (at, &node) in self.nodes.iter().enumerate() {
            for &source in self.tensors[node.index()].sources.as_slice() {
                let slot = &mut first_read[source.index()];
                *slot = (*slot).min(at);
            }
        }
        let tensors = &self.tensors;
        self.leafs.sort_by_key(|&leaf| {
            let input = tensors[leaf.index()].input;
            (input, if input { first_read[leaf.index()] } else { 0 })
        });
    }

    /// Pipeline parallelism (`n_copies` > 1 in `ggml_backend_sched`): each input is held
    /// `copies` times, allocated before anything else (the inputs first, in the order read)
    /// and never freed.
    pub(crate) fn keep_input_copies(&mut self, copies: u32, alignment: u64) {
        self.place_scratch_first();
        let inputs: Vec<TensorId> = self
            .leafs
            .iter()
            .copied()
            .filter(|&leaf| self.tensors[leaf.index()].input)
            .collect();
        let scratch = self
            .leafs
            .iter()
            .copied()
            .filter(|&l| !self.tensors[l.index()].input);
        self.leafs = inputs.iter().copied().chain(scratch).collect();
        for leaf in inputs {
            let tensor = &mut self.tensors[leaf.index()];
            let aligned = tensor.layout.bytes().div_ceil(alignment.max(1)) * alignment.max(1);
            tensor.extra_bytes = aligned.saturating_mul(u64::from(copies.saturating_sub(1)));
            tensor.output = true;
        }
    }

    /// Whether `id` is a graph input (made elsewhere, copied in).
    pub(crate) fn is_input(&self, id: TensorId) -> bool {
        self.tensor(id).input
    }

    /// The bytes `id`'s elements take (`ggml_nbytes`).
    pub(crate) fn bytes(&self, id: TensorId) -> u64 {
        self.tensor(id).layout.bytes()
    }

    /// How many tensors the graph has made: a watermark, since ids grow in creation order.
    pub(crate) fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The last node, in graph order, made before `watermark` ([`Graph::tensor_count`]) that
    /// reads a weight or a cache, or writes a cache: what `ggml_backend_sched` assigns to the
    /// backend holding that memory.
    pub(crate) fn last_memory_bound_node_before(&self, watermark: usize) -> Option<TensorId> {
        let reads_external = |id: TensorId| {
            let tensor = self.tensor(id);
            let external = |t: TensorId| self.tensor(t).external;
            tensor.sources.as_slice().iter().any(|&s| external(s))
                || tensor.view_of.is_some_and(external)
        };
        self.nodes
            .iter()
            .rev()
            .find(|&&id| id.index() < watermark && reads_external(id))
            .copied()
    }

    /// Ends the graph at `cut` (a node): the nodes after it run on another device, which copies
    /// what they read of this graph.
    pub(crate) fn end_at(&mut self, cut: TensorId) {
        if let Some(position) = self.nodes.iter().position(|&id| id == cut) {
            self.nodes.truncate(position + 1);
        }
    }

    /// Hands the graph up to `cut` (a node) to another device, as `ggml_backend_sched` does
    /// when the end of the host's last layer runs on the next device: the nodes up to `cut`
    /// leave this graph, and what the rest reads of them becomes inputs copied in, placed
    /// first (in the order the rest first reads them), before the graph's other inputs.
    pub(crate) fn hand_over_through(&mut self, cut: TensorId) {
        let Some(position) = self.nodes.iter().position(|&id| id == cut) else {
            return;
        };
        let mut kept = self.nodes.split_off(position + 1);
        let mut removed = vec![false; self.tensors.len()];
        for &id in &self.nodes {
            removed[id.index()] = true;
        }
        // A view of what left is that device's too: each is copied in apart.
        kept.retain(|&id| {
            let tensor = &self.tensors[id.index()];
            let left = tensor.view_of.is_some()
                && tensor.sources.len == 1
                && tensor.sources.as_slice().iter().all(|s| removed[s.index()]);
            if left {
                removed[id.index()] = true;
            }
            !left
        });
        let mut copied: Vec<TensorId> = Vec::new();
        let mut read: Vec<bool> = vec![false; self.tensors.len()];
        for &node in &kept {
            for &source in self.tensors[node.index()].sources.as_slice() {
                read[source.index()] = true;
                if removed[source.index()] && !copied.contains(&source) {
                    copied.push(source);
                }
            }
        }
        for &id in &copied {
            let tensor = &mut self.tensors[id.index()];
            tensor.computed = false;
            tensor.input = true;
            tensor.view_of = None;
            tensor.sources = Sources::NONE;
            tensor.extra_bytes = 0;
        }
        let others = self.leafs.iter().copied().filter(|&l| read[l.index()]);
        self.leafs = copied.iter().copied().chain(others).collect();
        self.nodes = kept;
    }

    /// The operation's sources of `id`, in order (none for a leaf).
    pub(crate) fn sources(&self, id: TensorId) -> &[TensorId] {
        self.tensor(id).sources.as_slice()
    }

    /// The extents of `id` (ggml's `ne`).
    pub(crate) fn extents(&self, id: TensorId) -> [u64; 4] {
        self.tensor(id).layout.ne
    }

    /// `ggml_is_contiguous`: whether `id`'s elements lie one after the other (a view of every
    /// other column does not).
    pub(crate) fn is_contiguous(&self, id: TensorId) -> bool {
        let layout = self.tensor(id).layout;
        layout.nb == Layout::contiguous(layout.element, layout.ne).nb
    }

    /// The byte strides of `id` (ggml's `nb`).
    pub(crate) fn strides(&self, id: TensorId) -> [u64; 4] {
        self.tensor(id).layout.nb
    }

    /// Marks `id` a graph output (the logits): never freed, never reused in place.
    pub(crate) fn mark_output(&mut self, id: TensorId) {
        self.tensors[id.index()].output = true;
    }

    /// Keeps `kept` in memory until `until` is computed, as `ggml_backend_sched` does for a
    /// backend's fusions (`add_alloc_dep`): a node with the kept tensors as sources, which is
    /// never placed itself, right after `until` (one per [`MAX_SOURCES`] kept tensors).
    pub(crate) fn keep_until(&mut self, kept: &[TensorId], until: TensorId) {
        for chunk in kept.chunks(MAX_SOURCES) {
            let dependency = self.push(Tensor {
                computed: true,
                external: true,
                sources: Sources::of(chunk),
                ..Tensor::of(Layout::contiguous(Element::F32, [0, 1, 1, 1]))
            });
            self.kept_until.push((until, dependency));
        }
    }

    /// The nodes in the order the allocator meets them: the graph's, each
    /// [`Graph::keep_until`] dependency right after its node.
    fn allocation_order(&self) -> std::borrow::Cow<'_, [TensorId]> {
        if self.kept_until.is_empty() {
            return std::borrow::Cow::Borrowed(&self.nodes);
        }
        let mut kept = self.kept_until.clone();
        // Stable: a node's dependencies keep the order they were added in.
        kept.sort_by_key(|&(until, _)| until.0);
        let mut order = Vec::with_capacity(self.nodes.len() + kept.len());
        for &node in &self.nodes {
            order.push(node);
            let first = kept.partition_point(|&(until, _)| until.0 < node.0);
            order.extend(
                kept[first..]
                    .iter()
                    .take_while(|&&(until, _)| until == node)
                    .map(|&(_, dependency)| dependency),
            );
        }
        std::borrow::Cow::Owned(order)
    }

    /// `ggml_build_forward_expand`: appends `id` after every source not yet in the graph, sources
    /// first in their order (the default left-to-right evaluation order).
    pub(crate) fn expand(&mut self, id: TensorId) {
        // An explicit stack: a 96-layer graph nests thousands deep.
        let mut stack = std::mem::take(&mut self.stack);
        stack.push((id, 0));
        while let Some((current, next_source)) = stack.pop() {
            if next_source == 0 {
                if self.visited[current.index()] {
                    continue;
                }
                self.visited[current.index()] = true;
            }
            let tensor = &self.tensors[current.index()];
            if let Some(&source) = tensor.sources.as_slice().get(next_source) {
                stack.push((current, next_source + 1));
                if !self.visited[source.index()] {
                    stack.push((source, 0));
                }
                continue;
            }
            if tensor.computed {
                self.nodes.push(current);
            } else if !tensor.external {
                // A weight or cache leaf is never placed: it is left out of the list.
                self.leafs.push(current);
            }
        }
        self.stack = stack;
    }
}

/// What the allocator tracks of one tensor (`hash_node`).
#[derive(Clone, Copy, Default)]
struct Slot {
    children: u32,
    views: u32,
    allocated: bool,
    offset: u64,
}

/// Where a node runs, from one device's graph: on it, on another device, or on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Here,
    There,
    Host,
}

/// The free list of one buffer (`ggml_dyn_tallocr` with a single chunk, as on the CPU and on any
/// backend whose largest buffer exceeds the graph): the free blocks inside the buffer, sorted
/// by offset, and the open end of the buffer (ggml's last block), where the buffer grows.
struct FreeList {
    alignment: u64,
    blocks: Vec<(u64, u64)>,
    open_end: u64,
    high_water: u64,
}

impl FreeList {
    fn new(alignment: u64) -> FreeList {
        FreeList {
            alignment: alignment.max(1),
            blocks: Vec::new(),
            open_end: 0,
            high_water: 0,
        }
    }

    fn aligned(&self, size: u64) -> u64 {
        size.div_ceil(self.alignment).saturating_mul(self.alignment)
    }

    /// The best-fitting free block (among equal sizes the last, as in ggml), else the open end.
    fn allocate(&mut self, size: u64) -> u64 {
        let size = self.aligned(size);
        let mut best: Option<usize> = None;
        for (i, &(_, block)) in self.blocks.iter().enumerate() {
            if block >= size && best.is_none_or(|b| block <= self.blocks[b].1) {
                best = Some(i);
            }
        }
        let offset = match best {
            Some(i) => {
                let (offset, block) = self.blocks[i];
                if block > size {
                    self.blocks[i] = (offset + size, block - size);
                } else {
                    self.blocks.remove(i);
                }
                offset
            }
            None => {
                let offset = self.open_end;
                self.open_end = offset.saturating_add(size);
                offset
            }
        };
        self.high_water = self.high_water.max(offset.saturating_add(size));
        offset
    }

    /// Returns `size` bytes at `offset`, merged with the free blocks (or the open end) it
    /// touches.
    fn free(&mut self, offset: u64, size: u64) {
        let size = self.aligned(size);
        let mut start = offset;
        let mut end = offset.saturating_add(size);
        let at = self.blocks.partition_point(|&(block, _)| block < offset);
        if let Some(&(next, length)) = self.blocks.get(at) {
            if next == end {
                end = next.saturating_add(length);
                self.blocks.remove(at);
            }
        }
        if at > 0 {
            let (previous, length) = self.blocks[at - 1];
            if previous.saturating_add(length) == start {
                start = previous;
                self.blocks.remove(at - 1);
            }
        }
        if end == self.open_end {
            self.open_end = start;
        } else {
            let at = self.blocks.partition_point(|&(block, _)| block < start);
            self.blocks.insert(at, (start, end - start));
        }
    }
}

/// The compute buffer `graph` needs, in bytes: the allocator's high-water mark after placing
/// every leaf and node in order (`ggml_gallocr_alloc_graph_impl` with one buffer).
pub(crate) fn reserve(graph: &Graph, alignment: u64) -> u64 {
    let mut replay = Replay {
        graph,
        slots: vec![Slot::default(); graph.tensors.len()],
        free: FreeList::new(alignment),
    };
    replay.run();
    replay.free.high_water
}

struct Replay<'a> {
    graph: &'a Graph,
    slots: Vec<Slot>,
    free: FreeList,
}

impl Replay<'_> {
    fn run(&mut self) {
        let graph = self.graph;
        let nodes = graph.allocation_order();
        for &node in nodes.iter() {
            let tensor = graph.tensor(node);
            if let Some(root) = tensor.view_of {
                self.slots[root.index()].views += 1;
            }
            for &source in tensor.sources.as_slice() {
                self.slots[source.index()].children += 1;
            }
        }
        for &leaf in &graph.leafs {
            let unread = graph.tensor(leaf).input && self.slots[leaf.index()].children == 0;
            if !(unread && graph.only_read_inputs) {
                self.allocate(leaf);
            }
        }
        // Inputs are placed before anything computed.
        for &node in nodes.iter() {
            let tensor = graph.tensor(node);
            if tensor.input {
                self.allocate(node);
            }
            for &source in tensor.sources.as_slice() {
                if graph.tensor(source).input {
                    self.allocate(source);
                }
            }
        }
        for &node in nodes.iter() {
            let sources = graph.tensor(node).sources.as_slice();
            for &source in sources {
                self.allocate(source);
            }
            self.allocate(node);
            for &source in sources {
                self.release(source);
            }
        }
    }

    fn is_own(&self, id: TensorId) -> bool {
        self.slots[id.index()].allocated
    }

    /// `ggml_gallocr_allocate_node`: a parent's memory when the operation may work in place and
    /// the parent has no other consumer, else a block from the free list.
    fn allocate(&mut self, id: TensorId) {
        let tensor = self.graph.tensor(id);
        if tensor.external || tensor.elsewhere || tensor.view_of.is_some() || self.is_own(id) {
            return;
        }
        self.slots[id.index()].allocated = true;
        if tensor.reuse == Reuse::InPlace {
            for &parent in tensor.sources.as_slice() {
                if self.reuse_parent(id, parent) {
                    return;
                }
            }
        }
        self.slots[id.index()].offset = self.free.allocate(tensor.allocated_bytes());
    }

    /// Takes over `parent`'s memory for `id` when ggml would. A view parent never qualifies: the
    /// allocator owns no view (`ggml_gallocr_is_own` is false for one), so its view branch
    /// never runs.
    fn reuse_parent(&mut self, id: TensorId, parent: TensorId) -> bool {
        let node = self.graph.tensor(id);
        let source = self.graph.tensor(parent);
        let slot = self.slots[parent.index()];
        if !slot.allocated
            || source.output
            || source.layout != node.layout
            || slot.children != 1
            || slot.views != 0
        {
            return false;
        }
        // Same layout, same size: nothing of the parent's block is left over.
        self.slots[id.index()].offset = slot.offset;
        self.slots[parent.index()].allocated = false;
        true
    }

    /// One consumer of `source` is done; frees it (or the tensor it views) when none is left.
    fn release(&mut self, source: TensorId) {
        let slot = &mut self.slots[source.index()];
        slot.children = slot.children.saturating_sub(1);
        if slot.children != 0 || slot.views != 0 {
            return;
        }
        match self.graph.tensor(source).view_of {
            Some(root) => {
                let root_slot = &mut self.slots[root.index()];
                root_slot.views = root_slot.views.saturating_sub(1);
                if root_slot.views == 0 && root_slot.children == 0 && root_slot.allocated {
                    self.free_tensor(root);
                }
            }
            None if slot.allocated => self.free_tensor(source),
            None => {}
        }
    }

    fn free_tensor(&mut self, id: TensorId) {
        let tensor = self.graph.tensor(id);
        if tensor.output {
            return;
        }
        let offset = self.slots[id.index()].offset;
        self.free.free(offset, tensor.allocated_bytes());
        self.slots[id.index()].allocated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    /// A 1 KiB f32 result of `sources`.
    fn kib(graph: &mut Graph, reuse: Reuse, sources: &[TensorId]) -> TensorId {
        graph.op(reuse, Element::F32, [256, 1, 1, 1], sources)
    }

    fn weight(graph: &mut Graph) -> TensorId {
        graph.external(Element::F32, [256, 1, 1, 1])
    }

    #[test]
    fn element_wise_operations_write_into_their_only_parent() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let b = kib(&mut graph, Reuse::InPlace, &[a]);
        let c = kib(&mut graph, Reuse::InPlace, &[b]);
        graph.expand(c);
        assert_eq!(reserve(&graph, 32), KIB);
    }

    #[test]
    fn a_freed_block_is_reused_by_the_next_tensor_that_fits() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let b = kib(&mut graph, Reuse::Fresh, &[a]);
        // `a` is free once `b` is computed, so `c` takes its block.
        let c = kib(&mut graph, Reuse::Fresh, &[b]);
        graph.expand(c);
        assert_eq!(reserve(&graph, 32), 2 * KIB);
    }

    #[test]
    fn a_parent_with_another_consumer_is_not_overwritten() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let b = kib(&mut graph, Reuse::InPlace, &[a]);
        let c = kib(&mut graph, Reuse::InPlace, &[b, a]);
        graph.expand(c);
        // `b` cannot take `a` (c still reads it); `c` then takes `b`'s block.
        assert_eq!(reserve(&graph, 32), 2 * KIB);
    }

    #[test]
    fn a_view_keeps_the_tensor_it_views_alive() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let half = graph.view(a, [128, 1, 1, 1], [4, 512, 512, 512]);
        let b = kib(&mut graph, Reuse::Fresh, &[w]);
        graph.expand(b);
        // Without the view `a` would be free here; the view's reader comes last.
        let c = kib(&mut graph, Reuse::Fresh, &[b, half]);
        graph.expand(c);
        assert_eq!(reserve(&graph, 32), 3 * KIB);
    }

    #[test]
    fn a_kept_tensor_lives_until_the_node_it_is_kept_for() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let b = kib(&mut graph, Reuse::InPlace, &[a]);
        let c = kib(&mut graph, Reuse::Fresh, &[b]);
        let d = kib(&mut graph, Reuse::Fresh, &[c]);
        graph.expand(d);
        assert_eq!(reserve(&graph, 32), 2 * KIB);
        // Kept until `d`: `b` cannot take `a`'s memory (a second reader), and `a` is still
        // there beside `b` and `c` (`d` then takes `b`'s block).
        graph.keep_until(&[a], d);
        assert_eq!(reserve(&graph, 32), 3 * KIB);
    }

    #[test]
    fn a_devices_unread_input_takes_no_memory() {
        let mut graph = Graph::default();
        let read = graph.input(Element::F32, [256, 1, 1, 1]);
        let unread = graph.input(Element::F32, [256, 1, 1, 1]);
        graph.expand(read);
        graph.expand(unread);
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w, read]);
        graph.expand(a);
        // The host's graph holds both inputs (its leaves); a device receives only what it reads.
        assert_eq!(reserve(&graph, 32), 3 * KIB);
        graph.receive_only_read_inputs();
        assert_eq!(reserve(&graph, 32), 2 * KIB);
    }

    #[test]
    fn outputs_are_never_freed_nor_written_over() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        graph.mark_output(a);
        let b = kib(&mut graph, Reuse::InPlace, &[a]);
        let c = kib(&mut graph, Reuse::Fresh, &[b]);
        graph.expand(c);
        assert_eq!(reserve(&graph, 32), 3 * KIB);
    }

    #[test]
    fn a_weight_in_host_memory_is_copied_in_as_the_split_reading_it_starts() {
        // x = input; a = w1 · x; b = w2 · a; the weights 4 KiB each in host memory.
        let mut graph = Graph::default();
        let x = graph.input(Element::F32, [256, 1, 1, 1]);
        let w1 = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w1, x]);
        let w2 = weight(&mut graph);
        let b = kib(&mut graph, Reuse::Fresh, &[w2, a]);
        graph.expand(b);
        graph.in_host_memory(w1, 4 * KIB, false);
        graph.in_host_memory(w2, 4 * KIB, false);
        graph.split_across_devices(false);
        // w1's copy and x's (one split, in the order a reads them), then a; then w2's copy (a
        // split of its own), then b.
        let bytes: Vec<u64> = graph.nodes.iter().map(|&n| graph.bytes(n)).collect();
        assert_eq!(bytes, [4 * KIB, KIB, KIB, 4 * KIB, KIB]);
        assert!(graph.leafs.is_empty(), "the input is the host's now");
        // At b: w2's copy where w1's and x's were, and b beside a.
        assert_eq!(reserve(&graph, 32), 6 * KIB);
    }

    #[test]
    fn a_host_cache_joins_the_split_and_a_write_on_the_host_ends_one() {
        // k = w · x; written into a host cache (on the host); then q = w2 · x; s = cache · q.
        let mut graph = Graph::default();
        let x = kib(&mut graph, Reuse::Fresh, &[]);
        let w = weight(&mut graph);
        let k = kib(&mut graph, Reuse::Fresh, &[w, x]);
        let destination = weight(&mut graph);
        let written = graph.write_rows(destination, k, k);
        graph.run_on_host(written);
        let cache = weight(&mut graph);
        graph.in_host_memory(cache, 2 * KIB, true);
        let scaled = kib(&mut graph, Reuse::Fresh, &[x]);
        let scores = kib(&mut graph, Reuse::Fresh, &[cache, scaled]);
        // A weight of this device's read last: the scheduler's expansion up from it runs the
        // nodes after the write here, not on the host.
        let own = graph.weight(Element::F32, [256, 1, 1, 1]);
        let out = kib(&mut graph, Reuse::Fresh, &[own, scores]);
        graph.expand(written);
        graph.expand(out);
        graph.in_host_memory(w, 4 * KIB, false);
        graph.split_across_devices(false);
        // After the write on the host, the next split begins at `scaled`: the cache's copy
        // (2 KiB) goes before it, not before `scores`.
        let order: Vec<u64> = graph.nodes.iter().map(|&n| graph.bytes(n)).collect();
        let copy_at = order
            .iter()
            .position(|&b| b == 2 * KIB)
            .expect("the cache's copy");
        assert_eq!(graph.nodes[copy_at + 1], scaled, "{order:?}");
    }

    #[test]
    fn inputs_are_placed_before_anything_computed() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let a = kib(&mut graph, Reuse::Fresh, &[w]);
        let late = graph.input(Element::F32, [256, 1, 1, 1]);
        let b = kib(&mut graph, Reuse::Fresh, &[a, late]);
        graph.expand(b);
        let mut replay = Replay {
            graph: &graph,
            slots: vec![Slot::default(); graph.tensors.len()],
            free: FreeList::new(32),
        };
        replay.run();
        // The input read last holds the bottom of the buffer from the start.
        assert_eq!(replay.slots[late.index()].offset, 0);
        assert_eq!(replay.slots[a.index()].offset, KIB);
        assert_eq!(replay.free.high_water, 3 * KIB);
    }

    #[test]
    fn expanding_appends_sources_before_their_consumers_once() {
        let mut graph = Graph::default();
        let w = weight(&mut graph);
        let positions = graph.input(Element::I32, [256, 1, 1, 1]);
        let a = kib(&mut graph, Reuse::Fresh, &[w, positions]);
        let b = kib(&mut graph, Reuse::Fresh, &[a]);
        let c = kib(&mut graph, Reuse::Fresh, &[a, b]);
        graph.expand(b);
        graph.expand(c);
        assert_eq!(graph.nodes, vec![a, b, c]);
        // The weight is never placed: only the input is listed.
        assert_eq!(graph.leafs, vec![positions]);
    }

    #[test]
    fn best_fit_takes_the_smallest_hole_and_freeing_merges_neighbours() {
        let mut free = FreeList::new(32);
        let offsets: Vec<u64> = [2 * KIB, KIB, KIB, KIB]
            .iter()
            .map(|&size| free.allocate(size))
            .collect();
        assert_eq!(offsets, vec![0, 2 * KIB, 3 * KIB, 4 * KIB]);
        free.free(0, 2 * KIB);
        free.free(3 * KIB, KIB);
        assert_eq!(free.allocate(KIB), 3 * KIB);
        assert_eq!(free.allocate(2 * KIB), 0);
        free.free(2 * KIB, KIB);
        free.free(3 * KIB, KIB);
        free.free(4 * KIB, KIB);
        // [2 K, 5 K) merged into the open end: the buffer can shrink back to 2 K.
        assert_eq!(free.open_end, 2 * KIB);
        assert!(free.blocks.is_empty());
        assert_eq!(free.high_water, 5 * KIB);
    }

    #[test]
    fn sizes_are_rounded_up_to_the_alignment() {
        let mut free = FreeList::new(32);
        assert_eq!(free.allocate(4), 0);
        assert_eq!(free.allocate(33), 32);
        assert_eq!(free.high_water, 96);
    }

    #[test]
    fn hostile_extents_saturate_instead_of_overflowing() {
        let huge = Layout::contiguous(Element::I64, [u64::MAX, u64::MAX, 2, 2]);
        assert_eq!(huge.bytes(), u64::MAX);
        let empty = Layout::contiguous(Element::F32, [0, 7, 1, 1]);
        assert_eq!(empty.bytes(), 0);
        let mut free = FreeList::new(32);
        assert_eq!(free.allocate(u64::MAX), 0);
        assert_eq!(free.allocate(u64::MAX), u64::MAX);
        assert_eq!(free.high_water, u64::MAX);
    }
}
