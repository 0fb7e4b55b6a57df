// The browser the tests drive, chosen by BROWSER:
// - 'chromium' (default): Debian's Chromium through playwright-core; WebGPU is Dawn on SwiftShader.
// - 'firefox': Debian's Firefox ESR through WebDriver BiDi (puppeteer-core; Playwright cannot drive
//   a stock Firefox); WebGPU is Firefox's own wgpu on Mesa's lavapipe.
// Two WebGPU implementations, so a difference between them is a failing test, not a user's bug
// report. Both give pages with the part of Playwright's Page API the tests use.

export const BROWSER = process.env.BROWSER || 'chromium';

export const CHROME_ARGS = [
  '--headless=new', '--no-sandbox', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
  // WebGPU on a machine without a GPU: unsafe-webgpu exposes the SwiftShader adapter.
  '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader',
];

// WebGPU is not on by default in Firefox ESR on Linux (../shared/tools/firefox-webgpu.md).
const FIREFOX_PREFS = {
  'dom.webgpu.enabled': true,
  'dom.webgpu.workers.enabled': true,
  'gfx.webgpu.ignore-blocklist': true,
  'gfx.webgpu.force-enabled': true,
};

/** { newPage(), close(), name } */
export async function launchBrowser() {
  if (BROWSER === 'chromium') {
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: CHROME_ARGS, headless: false });
    const context = await browser.newContext();
    return { name: 'chromium', newPage: () => context.newPage(), close: () => browser.close() };
  }
  if (BROWSER === 'firefox') {
    const { default: puppeteer } = await import('puppeteer-core');
    const browser = await puppeteer.launch({
      browser: 'firefox',
      executablePath: process.env.FIREFOX || '/usr/bin/firefox-esr',
      headless: true,
      extraPrefsFirefox: FIREFOX_PREFS,
      // Software WebGPU: one evaluate can take minutes.
      protocolTimeout: 0,
    });
    return { name: 'firefox', newPage: async () => playwrightLike(await browser.newPage()), close: () => browser.close() };
  }
  throw new Error(`BROWSER must be chromium or firefox, got ${BROWSER}`);
}

// Playwright's names for what puppeteer spells differently.
function playwrightLike(page) {
  const waitForFunction = page.waitForFunction.bind(page);
  page.waitForFunction = (fn, arg, opts = {}) => waitForFunction(fn, { polling: 100, timeout: opts.timeout ?? 30000 }, arg);
  page.fill = (sel, value) => page.$eval(sel, (el, v) => {
    el.value = v;
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
  page.selectOption = (sel, value) => page.select(sel, value);
  return page;
}
