/* SPDX-License-Identifier: GPL-2.0 */
/*
 * devlend fabric API: what the rest of the module uses to talk to peers.
 *
 * The shape follows the Linux NTB API (include/linux/ntb.h), so that a
 * backend for real NTB adapters can sit beside the emulated one:
 *
 *  - clients: the lender and the borrower register as clients and are
 *    told of every fabric, keeping a context for each (like ntb_client
 *    and ntb_set_ctx());
 *  - links: a peer is up or down; changes are reported to each client
 *    (like ntb_ctx_ops.link_event);
 *  - memory windows: each up peer has one window onto its RAM, with a
 *    translation from the addresses the peer hands out to the window's
 *    (like ntb_peer_mw_get_addr() plus the peer's ntb_mw_set_trans());
 *  - inbound windows: what this host hands a peer so that the peer
 *    reaches a page of this host (dl_fabric_inbound_map()): its physical
 *    address where peers see all of its RAM, else an offset of the
 *    peer's bounded window onto it, handed out and translated here;
 *  - doorbells: ring a vector of a peer (like ntb_peer_db_set()); vector
 *    %DL_DB_VEC_MSG belongs to the fabric, the others may be claimed;
 *  - host info: what each peer publishes about itself (the scratchpads);
 *  - messages: posted sends, requests that wait for a response, and
 *    per-type handlers for what peers send (like ntb_msg_*, but with
 *    rings of slots instead of single registers).
 *
 * Messages to one peer arrive in order. Requests and posted messages may
 * use half of a ring, and at most that many requests may be in flight to
 * a peer; the other half is kept for responses, so answering from a
 * handler never waits for room. Of that half, %DL_FABRIC_URGENT_SLOTS
 * slots and request credits are kept for urgent requests (those that
 * give something back, such as unmapping DMA or returning a device), so
 * that a ring full of BAR writes or reads never keeps them from going out.
 *
 * Everything a peer sends is untrusted; the fabric checks indices, lengths,
 * sources and sequence numbers, but handlers must still check payloads.
 *
 * Locks, as far as clients see them, outermost first:
 *  0. dl_clients_lock, the client registry's: fabrics and clients come
 *     and go under it; a client's @add and @remove run under it.
 *  1. fab->lock (the liveness work): @peer_event runs under it, so a
 *     client must not block there for long (mark, queue, return).
 *  2. the client's own locks (each client's internal.h gives their
 *     order); the fabric never takes them, only calls a client's
 *     callbacks, which may.
 *  3. the fabric's leaf locks, taken by the calls below and by nothing
 *     they call back into.
 * The receive work holds a lock for reading around a handler call,
 * outside the handler's own locks; (un)registering a handler takes it for
 * writing, so is never done with a lock a handler takes.
 * Calls below never take fab->lock, so a client may make them with its
 * own mutexes held; requests sleep, so never with a spinlock held.
 */
#ifndef DL_FABRIC_H
#define DL_FABRIC_H

#include <linux/completion.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/stddef.h>
#include <linux/types.h>

#include "devlend_wire.h"

struct dentry;
struct device;
struct dl_fabric;
struct kobject;

/* Message types handlers can be registered for are below this. */
#define DL_FABRIC_MAX_TYPES	64

/* Default time dl_fabric_request() waits for a response. */
#define DL_FABRIC_REQ_TIMEOUT_MS	2000

/* Ring slots and request credits per peer kept for urgent requests. */
#define DL_FABRIC_URGENT_SLOTS		8

/**
 * enum dl_fabric_event_type - what a client's @peer_event is told.
 * @DL_FABRIC_EV_PEER_UP: a peer became reachable: messages can be sent
 *	and its memory window is known.
 * @DL_FABRIC_EV_PEER_DOWN: a peer went away; its requests have already
 *	failed with -ENOTCONN and its window must no longer be used.
 */
enum dl_fabric_event_type {
	DL_FABRIC_EV_PEER_UP,
	DL_FABRIC_EV_PEER_DOWN,
};

/*
 * Clients a fabric serves at once: the lender, the borrower, the emulated
 * NTB port, the self-test, and room for tests.
 */
#define DL_FABRIC_MAX_CLIENTS	8

/**
 * struct dl_fabric_client - a user of fabrics, after &struct ntb_client:
 *	it is told of every fabric, those set up before it registered and
 *	those set up later, and keeps a context of its own for each.
 * @name: for logs.
 * @add: a fabric is there. Set *@ctx to the client's context for it and
 *	return 0 to serve it, or return -errno to stay away from it. Peers
 *	already up are then reported through @peer_event. Process context,
 *	may sleep; the fabric's liveness lock is not held.
 * @remove: the client no longer serves @fab: the fabric is going away
 *	(every peer is down already) or the client is (peers may be up).
 *	Drop every reference to @fab before returning. Process context.
 * @peer_event: a peer went up or down. Called with the fabric's liveness
 *	lock held (see the lock order above): mark, queue, do not block.
 * @bar_window_lost: optional. A window of this host onto peers' BARs
 *	(what dl_fabric_peer_bar() finds) is going away: stop every mapping
 *	of an address in [@phys, @phys + @len) before returning, for those
 *	addresses may soon belong to something else. Process context, may
 *	sleep; the fabric's liveness lock is not held.
 * @slot: private to the core.
 * @node: private to the core.
 */
struct dl_fabric_client {
	const char *name;
	int (*add)(struct dl_fabric *fab, void **ctx);
	void (*remove)(struct dl_fabric *fab, void *ctx);
	void (*peer_event)(struct dl_fabric *fab, void *ctx,
			   enum dl_fabric_event_type type, u32 peer, u16 proto);
	void (*bar_window_lost)(struct dl_fabric *fab, void *ctx,
				phys_addr_t phys, u64 len);
	int slot;
	struct list_head node;
};

/**
 * struct dl_fabric_mw - a memory window onto a peer's RAM.
 * @dev: the device that provides the window (for logs and sysfs).
 * @phys_addr: CPU physical address of the window, usable as a DMA target
 *	for peer-to-peer transfers (e.g. in an IOMMU mapping).
 * @size: bytes in the window.
 */
struct dl_fabric_mw {
	struct device *dev;
	phys_addr_t phys_addr;
	resource_size_t size;
};

/**
 * struct dl_fabric_peer_info - what a peer published about itself.
 * @up: whether the link to the peer is up.
 * @proto: negotiated protocol version, 0 when not up.
 * @incarnation: the peer's incarnation; changes when it re-attaches.
 * @ram_size: bytes of RAM the peer has.
 * @name: the peer's host name, for humans only.
 */
struct dl_fabric_peer_info {
	bool up;
	u16 proto;
	u64 incarnation;
	u64 ram_size;
	char name[sizeof_field(struct dl_host_info, name) + 1];
};

/**
 * struct dl_fabric_msg - a received message, as handed to a handler.
 * @peer: the sender's host id.
 * @type: the message type.
 * @proto: the protocol version it is encoded with.
 * @epoch: the low 32 bits of the incarnation the sender had when it sent
 *	the message (the peer's incarnation, received messages only).
 * @req_id: nonzero if the sender waits for a response (dl_fabric_respond()).
 * @data: the payload; valid only during the handler call.
 * @len: bytes at @data.
 * @urgent: when sending: the message may use the slots kept for urgent
 *	requests. Never set on a received message.
 */
struct dl_fabric_msg {
	u32 peer;
	u16 type;
	u16 proto;
	u32 epoch;
	u64 req_id;
	const void *data;
	size_t len;
	bool urgent;
};

/*
 * A handler runs in the fabric's receive work, in process context, one
 * message at a time per fabric. It may sleep briefly (e.g. to respond) but
 * must never wait for another message from the fabric, for a peer, or for
 * a lock that is held across either: nothing else is received until it
 * returns. So dl_fabric_send() from a handler does not wait for ring
 * room: it fails with -EAGAIN, and the handler leaves the message to a
 * work of its own.
 */
typedef void (*dl_fabric_msg_fn)(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv);

/*
 * An atomic handler may take a posted message in the doorbell interrupt,
 * hard interrupt context with a spinlock held: it must not sleep. It
 * returns false to leave the message to the receive work's handler
 * (which then sees it in ring order, as if the interrupt had not looked
 * at it): whatever is not the plain, fast case goes there.
 */
typedef bool (*dl_fabric_msg_atomic_fn)(struct dl_fabric *fab,
					const struct dl_fabric_msg *msg,
					void *priv);

/* Called from hard interrupt context when a peer rings @vector. */
typedef void (*dl_fabric_db_fn)(struct dl_fabric *fab, unsigned int vector,
				void *priv);

/**
 * struct dl_fabric_req - one request in flight, owned by the caller.
 * @resp: where the response payload goes (may be NULL if @resp_size is 0).
 * @resp_size: bytes available at @resp.
 * @resp_len: bytes the response carried (may exceed @resp_size, then the
 *	result is -EMSGSIZE and @resp holds the first @resp_size bytes).
 * @urgent: set before submitting: the request may use the credits and ring
 *	slots kept for urgent requests (%DL_FABRIC_URGENT_SLOTS).
 * @status: the result: 0, -errno mapped from the response status,
 *	-EPROTO for a response of another type, -ETIMEDOUT, -ENOTCONN or
 *	-ENODEV.
 * @sent: when the request was published to the peer.
 * @done: when its response arrived (valid if @status is not a local error).
 * @peer_inc: the peer's incarnation the request was sent to, 0 if it was
 *	not sent. Only that incarnation's answer is taken, so what a client
 *	learns from the answer (a device granted to it) belongs to this
 *	incarnation, and when no answer came (-ETIMEDOUT, -ENOTCONN) this
 *	is the incarnation that may have acted on it.
 * @peer: private: the peer asked.
 * @type: private: the message type asked.
 * @wire_id: private: the request id on the wire.
 * @completion: private: completed once the request has a result.
 *
 * Fill in @resp and @resp_size, then dl_fabric_req_submit() and
 * dl_fabric_req_wait(). After dl_fabric_req_wait() returns (or submit
 * fails) the fabric no longer references the request.
 */
struct dl_fabric_req {
	void *resp;
	size_t resp_size;
	size_t resp_len;
	bool urgent;
	int status;
	ktime_t sent;
	ktime_t done;
	u64 peer_inc;

	u32 peer;
	u16 type;
	u64 wire_id;
	struct completion completion;
};

/* Clients. */
int dl_fabric_client_register(struct dl_fabric_client *client);
void dl_fabric_client_unregister(struct dl_fabric_client *client);
void *dl_fabric_client_ctx(struct dl_fabric *fab,
			   const struct dl_fabric_client *client);
int dl_fabric_client_for_each(const struct dl_fabric_client *client,
			      int (*fn)(struct dl_fabric *fab, void *ctx,
					void *arg),
			      void *arg);

/* debugfs: devlend/ for every module's files, and one fabric's directory. */
struct dentry *dl_fabric_debugfs_root(void);
struct dentry *dl_fabric_debugfs_dir(struct dl_fabric *fab);

/* The fabric and its peers. */
struct device *dl_fabric_device(struct dl_fabric *fab);
struct kobject *dl_fabric_sysfs_dir(struct dl_fabric *fab);
u32 dl_fabric_host_id(struct dl_fabric *fab);
u32 dl_fabric_max_hosts(struct dl_fabric *fab);
u64 dl_fabric_ram_size(struct dl_fabric *fab);
size_t dl_fabric_max_payload(struct dl_fabric *fab);
u32 dl_fabric_max_requests(struct dl_fabric *fab);
bool dl_fabric_link_is_up(struct dl_fabric *fab, u32 peer);
int dl_fabric_peer_info(struct dl_fabric *fab, u32 peer,
			struct dl_fabric_peer_info *info);

/* Memory windows. */
int dl_fabric_peer_mw(struct dl_fabric *fab, u32 peer,
		      struct dl_fabric_mw *mw);
int dl_fabric_peer_mw_xlate(struct dl_fabric *fab, u32 peer, u64 peer_addr,
			    u64 len, phys_addr_t *mw_addr, u64 *run);

/* Inbound windows: how peers reach this host's RAM (window.c). */
int dl_fabric_inbound_map(struct dl_fabric *fab, u32 peer, phys_addr_t phys,
			  u64 len, u64 *addr);
void dl_fabric_inbound_unmap(struct dl_fabric *fab, u32 peer, u64 addr,
			     u64 len);
bool dl_fabric_inbound_windowed(struct dl_fabric *fab);

/*
 * BAR windows: a device BAR of this host shown to a peer, and where a
 * peer's shown BAR is in this host's address space (window.c).
 */
struct pci_dev;

/**
 * struct dl_fabric_span - a byte range [@start, @end).
 * @start: first byte.
 * @end: one past the last.
 */
struct dl_fabric_span {
	u64 start;
	u64 end;
};

int dl_fabric_bar_expose(struct dl_fabric *fab, u32 peer,
			 struct pci_dev *pdev, int bar,
			 const struct dl_fabric_span *skip, unsigned int nskip,
			 u64 *token, u64 *len);
void dl_fabric_bar_revoke(struct dl_fabric *fab, u32 peer, u64 token,
			  u64 len);
int dl_fabric_peer_bar(struct dl_fabric *fab, u32 peer, u64 token, u64 len,
		       phys_addr_t *phys);
bool dl_fabric_peer_bar_capable(struct dl_fabric *fab, u32 peer);

/* Doorbells. */
int dl_fabric_peer_db_set(struct dl_fabric *fab, u32 peer,
			  unsigned int vector);
int dl_fabric_db_register(struct dl_fabric *fab, unsigned int vector,
			  dl_fabric_db_fn fn, void *priv);
void dl_fabric_db_unregister(struct dl_fabric *fab, unsigned int vector);
int dl_fabric_db_claim(struct dl_fabric *fab, dl_fabric_db_fn fn, void *priv);
int dl_fabric_peer_db_msg(struct dl_fabric *fab, u32 peer, unsigned int vector,
			  phys_addr_t *addr, u32 *data);

/* Messages. */
int dl_fabric_register_handler(struct dl_fabric *fab, u16 type,
			       dl_fabric_msg_fn fn, void *priv);
void dl_fabric_unregister_handler(struct dl_fabric *fab, u16 type);
int dl_fabric_register_handler_atomic(struct dl_fabric *fab, u16 type,
				      dl_fabric_msg_fn fn,
				      dl_fabric_msg_atomic_fn atomic_fn,
				      void *priv);
int dl_fabric_send_atomic(struct dl_fabric *fab, u32 peer, u16 type,
			  const void *data, size_t len);
int dl_fabric_send(struct dl_fabric *fab, u32 peer, u16 type,
		   const void *data, size_t len);
int dl_fabric_respond(struct dl_fabric *fab, const struct dl_fabric_msg *req,
		      int err, const void *data, size_t len);
int dl_fabric_req_submit(struct dl_fabric *fab, u32 peer, u16 type,
			 const void *data, size_t len,
			 struct dl_fabric_req *req);
int dl_fabric_req_wait(struct dl_fabric *fab, struct dl_fabric_req *req,
		       unsigned int timeout_ms);
int dl_fabric_request(struct dl_fabric *fab, u32 peer, u16 type,
		      const void *data, size_t len, void *resp,
		      size_t resp_size, size_t *resp_len,
		      unsigned int timeout_ms);
int dl_fabric_request_urgent(struct dl_fabric *fab, u32 peer, u16 type,
			     const void *data, size_t len,
			     unsigned int timeout_ms);

#endif /* DL_FABRIC_H */
