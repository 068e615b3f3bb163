//! The shutdown deadline as the totals path's cut-off.

use crate::totals::Cutoff;

use super::shutdown::Deadline;

impl Cutoff for Deadline {
    fn passed(&mut self) -> bool {
        Deadline::passed(self)
    }

    async fn wait(&mut self) {
        Deadline::wait(self).await;
    }
}
