//! ERR and REQ notifications as an event-manager subscriber.

use std::path::{Path, PathBuf};

use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use log::{error, warn};
use vmm_sys_util::eventfd::EventFd;

/// What a device asks of the VMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// ERR: the device failed (on devlend: the lender went down or took the
    /// device back). Further I/O fails; stop the guest or unplug the device.
    Error,
    /// REQ: the host wants the device back; unplug it from the guest.
    Request,
}

const DATA_ERR: u32 = 1;
const DATA_REQ: u32 = 2;

type Handler = Box<dyn FnMut(&Path, DeviceEvent) + Send>;

/// Watches a device's ERR and REQ eventfds in an `event_manager::EventManager`
/// and calls the handler once per signal. Register it with
/// `EventManager::add_subscriber`; events are tagged with constant data, not
/// matched on fds.
pub struct NotifierSubscriber {
    path: PathBuf,
    err: Option<EventFd>,
    req: Option<EventFd>,
    handler: Handler,
}

impl std::fmt::Debug for NotifierSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifierSubscriber")
            .field("path", &self.path)
            .field("err", &self.err.is_some())
            .field("req", &self.req.is_some())
            .finish()
    }
}

impl NotifierSubscriber {
    pub(crate) fn new(
        path: PathBuf,
        err: Option<EventFd>,
        req: Option<EventFd>,
        handler: Handler,
    ) -> Self {
        NotifierSubscriber {
            path,
            err,
            req,
            handler,
        }
    }

    /// The ERR eventfd, if the device has one.
    pub fn error_eventfd(&self) -> Option<&EventFd> {
        self.err.as_ref()
    }

    /// The REQ eventfd, if the device has one.
    pub fn request_eventfd(&self) -> Option<&EventFd> {
        self.req.as_ref()
    }
}

impl MutEventSubscriber for NotifierSubscriber {
    fn init(&mut self, ops: &mut EventOps) {
        for (fd, data) in [(&self.err, DATA_ERR), (&self.req, DATA_REQ)] {
            if let Some(fd) = fd {
                if let Err(e) = ops.add(Events::with_data(fd, data, EventSet::IN)) {
                    error!("{}: cannot watch notifier: {e:?}", self.path.display());
                }
            }
        }
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        let (fd, event) = match events.data() {
            DATA_ERR => (&self.err, DeviceEvent::Error),
            DATA_REQ => (&self.req, DeviceEvent::Request),
            other => {
                warn!("{}: unexpected event data {other}", self.path.display());
                return;
            }
        };
        let Some(fd) = fd else { return };
        if events
            .event_set()
            .intersects(EventSet::ERROR | EventSet::HANG_UP)
        {
            warn!(
                "{}: notifier eventfd failed; no longer watched",
                self.path.display()
            );
            let _ = ops.remove(events);
            return;
        }
        // Non-blocking: a spurious wakeup reads EAGAIN and reports nothing.
        if fd.read().is_ok() {
            (self.handler)(&self.path, event);
        }
    }
}
