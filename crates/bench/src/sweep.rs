//! placeholder
pub async fn sweep(_args: &crate::SweepArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
